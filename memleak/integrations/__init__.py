"""Where people work: pytest, Lightning, Hugging Face, zero-code runs, distributed runs."""
