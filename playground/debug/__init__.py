"""The constraint debugger: why a token was refused, testing an instance, confidence per field, tool calls."""
