"""Pydantic types shared by every surface, one module per concern; the package re-exports the ones in use.

Field names mirror TGI's OpenAPI schemas (GenerateParameters, Token, Details, ...) and OpenAI's chat
types, so a client that knows either finds what it expects. Extra insight (raw logprobs, mass kept,
validation verdict) is added as extra fields, which TGI's schemas allow.
"""

from playground.types.base import ConstraintKind as ConstraintKind
from playground.types.base import EngineName as EngineName
from playground.types.base import FinishReason as FinishReason
from playground.types.base import InputText as InputText
from playground.types.base import Name as Name
from playground.types.base import Strict as Strict
from playground.types.base import TokenIds as TokenIds
from playground.types.base import TokenPrompt as TokenPrompt
from playground.types.chat import ChatChoice as ChatChoice
from playground.types.chat import ChatCompletion as ChatCompletion
from playground.types.chat import ChatCompletionRequest as ChatCompletionRequest
from playground.types.chat import ChatMessage as ChatMessage
from playground.types.chat import NamedToolChoice as NamedToolChoice
from playground.types.chat import TokenLogprob as TokenLogprob
from playground.types.chat import ToolSpec as ToolSpec
from playground.types.chat import check_messages_size as check_messages_size
from playground.types.params import GenerateParameters as GenerateParameters
from playground.types.params import GrammarType as GrammarType
from playground.types.params import ProcessorSpec as ProcessorSpec
from playground.types.results import FailedCandidate as FailedCandidate
from playground.types.results import FieldConfidence as FieldConfidence
from playground.types.results import GeneratedToken as GeneratedToken
from playground.types.results import GenerationResult as GenerationResult
from playground.types.results import NextTokenCandidate as NextTokenCandidate
from playground.types.results import NextTokenDistribution as NextTokenDistribution
from playground.types.results import ReasoningSpan as ReasoningSpan
from playground.types.results import SegmentVerdict as SegmentVerdict
from playground.types.results import Sequence as Sequence
from playground.types.results import Timings as Timings
from playground.types.results import TokenEvent as TokenEvent
from playground.types.results import Validation as Validation
from playground.types.results import segment_figures as segment_figures
from playground.types.tgi import BestOfSequence as BestOfSequence
from playground.types.tgi import Details as Details
from playground.types.tgi import GenerateRequest as GenerateRequest
from playground.types.tgi import GenerateResponse as GenerateResponse
from playground.types.tgi import ModelInfo as ModelInfo
from playground.types.tgi import PrefillToken as PrefillToken
from playground.types.tgi import StreamDetails as StreamDetails
from playground.types.tgi import StreamResponse as StreamResponse
from playground.types.tgi import Token as Token
