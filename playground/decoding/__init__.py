"""Local decoding: the loaded model's decode path, from prompt to tokens."""
