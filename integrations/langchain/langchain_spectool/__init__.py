"""langchain-spectool: speculative tool calls for LangChain agents.

``SpeculativeToolMiddleware`` adds speculation to a ``create_agent`` agent;
``SpeculativeChatModel`` (and its ``wrap_tools``) adds it to graphs that are already built
(prebuilt ReAct agents, LangGraph graphs with a ``ToolNode``); ``speculable`` declares which
LangChain tools may run early (every other tool is mutating and never does).
"""

from ._agent import create_agent
from ._effects import effect_of, speculable
from ._middleware import SpeculativeToolMiddleware
from ._wrap import SpeculativeChatModel, SpeculativeTool

__version__ = "0.1.0"

__all__ = [
    "SpeculativeChatModel",
    "SpeculativeTool",
    "SpeculativeToolMiddleware",
    "create_agent",
    "effect_of",
    "speculable",
]
