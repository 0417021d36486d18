"""`spectool overhead`: what the client-side middleware costs per turn, and what it saves."""
