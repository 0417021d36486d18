"""LangChain's standard unit tests (langchain-tests) for SpeculativeChatModel around the
scripted chat model (no real provider can run here)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langchain_tests.unit_tests import ChatModelUnitTests

from langchain_spectool import SpeculativeChatModel
from langchain_spectool.testing import ScriptedChatModel


class TestSpeculativeChatModelStandard(ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[SpeculativeChatModel]:
        return SpeculativeChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"model": ScriptedChatModel(script=[AIMessage("hello")] * 50)}

    @property
    def has_tool_calling(self) -> bool:
        return True

    @property
    def has_structured_output(self) -> bool:
        return False
