"""spectool-agents: speculative tool calling for OpenAI Agents SDK agents.

``async with speculate(agent, drafter, effects={...}) as fast: await Runner.run(fast, ...)``.
Drafting starts from each agent's ``on_llm_start`` hook, so the run's own model resolution
(``RunConfig``, each agent's model, handoffs) is untouched; declared function tools are served
from the drafts' early runs when the model calls them (the SDK's hooks cannot substitute a
result, so the tools' ``on_invoke_tool`` is wrapped).
"""

from ._hooks import SpeculativeHooks
from ._session import speculate
from ._tools import SpeculativeInvoker

__version__ = "0.1.0"

__all__ = ["SpeculativeHooks", "SpeculativeInvoker", "speculate"]
