"""Ready-made constraints per kind, each with a prompt the small embedded model answers well; the UI's
example picker and the Playground widget offer the same ones."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    """A constraint a user can load with one click, and a message that fits it."""

    title: str
    text: str
    message: str


PERSON_SCHEMA = """{
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 20},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "city": {"type": "string", "maxLength": 20}
  },
  "required": ["name", "age", "city"],
  "additionalProperties": false
}"""

WEATHER_SCHEMA = """{
  "type": "object",
  "properties": {
    "city": {"type": "string", "maxLength": 20},
    "temperature_c": {"type": "integer", "minimum": -50, "maximum": 60},
    "sky": {"enum": ["sunny", "cloudy", "rainy", "snowy"]}
  },
  "required": ["city", "temperature_c", "sky"],
  "additionalProperties": false
}"""

# Each ends on its own (no rule repeats without bound), so the model finishes instead of looping to the limit.
CALCULATION_GRAMMAR = """start: NUMBER " " OP " " NUMBER " = " NUMBER
OP: "+" | "-" | "*" | "/"
NUMBER: /[0-9]{1,3}/"""

CAPITAL_GRAMMAR = 'start: "The capital of " NAME " is " NAME "."\nNAME: /[A-Z][a-z]{2,12}/\n'

YES_NO_GRAMMAR = 'start: answer "."\nanswer: "Yes" | "No"\n'

# Segment constraints (vLLM's structural_tag): free text, and the JSON inside the markers checked against its schema.
FENCED_JSON = (
    '{"structures": [{"begin": "```json\\n", "end": "\\n```", "schema": '
    + WEATHER_SCHEMA.replace("\n", "\n  ")
    + '}],\n "triggers": ["```json"]}'
)
TAGGED_ANSWER = (
    '{"format": {"type": "triggered_tags", "triggers": ["<answer>"], "stop_after_first": true,\n'
    ' "tags": [{"begin": "<answer>", "end": "</answer>", "content": {"type": "json_schema", "json_schema": '
    + PERSON_SCHEMA.replace("\n", "\n  ")
    + "}}]}}"
)
# The same kind in llama.cpp's GBNF: the engines tell the dialects apart by the rule syntax (`::=`).
DATE_GBNF = (
    'root ::= year "-" month "-" day\n'
    "year ::= [12] [0-9] [0-9] [0-9]\n"
    'month ::= "0" [1-9] | "1" [0-2]\n'
    'day ::= "0" [1-9] | [12] [0-9] | "3" [01]\n'
)

WEATHER_TOOLS = """{
  "tool_choice": "required",
  "tools": [
    {"type": "function", "function": {
      "name": "get_weather", "description": "Current weather in a city",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": false}}},
    {"type": "function", "function": {
      "name": "get_time", "description": "Current time in a time zone",
      "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET", "PST"]}},
        "required": ["zone"], "additionalProperties": false}}}
  ]
}"""

EXAMPLES: dict[str, list[Example]] = {
    "json_schema": [
        Example("Person", PERSON_SCHEMA, "Invent a person and describe them as JSON."),
        Example("Weather report", WEATHER_SCHEMA, "What is the weather like in Paris today? Answer in JSON."),
    ],
    # [0-9] rather than \d: the engines' \d admits every Unicode digit, and small models do use them.
    "regex": [
        Example(
            "IPv4 address",
            r"((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])",
            "Give me the IP address of a home router.",
        ),
        Example(
            "ISO date",
            r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
            "What date is New Year's Day 2025?",
        ),
        Example("Phone number", r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}", "Write a US phone number."),
    ],
    "choice": [
        Example(
            "Sentiment", "positive\nnegative\nneutral", "Sentiment of: 'I loved this movie, the actors were great!'"
        ),
        Example("Capital city", "Paris\nLondon\nBerlin\nMadrid\nRome", "What is the capital of Germany?"),
    ],
    "grammar": [
        Example("Calculation", CALCULATION_GRAMMAR, "What is 7 times 6? Answer with the calculation."),
        Example("Capital sentence", CAPITAL_GRAMMAR, "What is the capital of Italy?"),
        Example("Yes or no", YES_NO_GRAMMAR, "Can fish climb trees?"),
        Example("Date (GBNF)", DATE_GBNF, "When did the Berlin Wall fall? Answer with the date."),
    ],
    "structural_tag": [
        Example(
            "JSON in a ```json fence",
            FENCED_JSON,
            "Describe today's weather in Paris, with the data in a ```json block.",
        ),
        Example(
            "Answer after <answer>", TAGGED_ANSWER, "Think about a person, then give them inside <answer></answer>."
        ),
    ],
    "tools": [Example("Weather or time", WEATHER_TOOLS, "What's the weather in Paris?")],
}


def example_titles(kind: str) -> list[str]:
    """Titles offered in the example picker for a kind."""
    return [example.title for example in EXAMPLES.get(kind, [])]


def find_example(kind: str, title: str | None) -> Example | None:
    """The example with that title, or the kind's first one when the title is unknown."""
    examples = EXAMPLES.get(kind, [])
    for example in examples:
        if example.title == title:
            return example
    return examples[0] if examples else None
