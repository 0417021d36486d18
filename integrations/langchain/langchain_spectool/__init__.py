"""langchain-spectool: speculative tool calls for LangChain agents.

``SpeculativeToolMiddleware`` adds speculation to a ``create_agent`` agent;
``speculative_model`` / ``speculative_tools`` add it to graphs that are already built
(prebuilt ReAct agents, LangGraph graphs with a ``ToolNode``); ``speculable`` declares which
LangChain tools may run early (every other tool is mutating and never does).
"""

from ._effects import effect_of, speculable
from ._middleware import SpeculativeToolMiddleware

__version__ = "0.1.0"

__all__ = [
    "SpeculativeToolMiddleware",
    "effect_of",
    "speculable",
]
