"""LangChain side of spectool-mcp (needs langchain-spectool and langchain-mcp-adapters)."""

from ._langchain import declare_mcp_tools

__all__ = ["declare_mcp_tools"]
