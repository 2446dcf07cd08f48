"""The wire layer: every request shape in, every provider body out, one set of limits and error words.

- `inbound`: TGI body, OpenAI/vLLM chat body, UI form, widget call -> GenerateParameters (+ Constraint)
- `outbound`: GenerateParameters -> each provider's request body (providers and the Code tab share it)
- `controls`: the sampling controls table (name, range, neutral value, which wire dialects carry it)
- `limits`: the checks every surface applies before work starts (best_of needs sampling, max_best_of, ...)
- `errors`: pydantic's errors -> one line naming each field
"""
