"""xr-edge: an offline voice-agent service for XR edge hardware.

Data flow: audio -> VAD -> STT (``edge.voice``) -> AgentRouter (``edge.routing``) ->
Conversation (``edge.conversation``) -> local LLM (``edge.llm``) -> TTS -> audio.
"""

__version__ = "0.1.0"
