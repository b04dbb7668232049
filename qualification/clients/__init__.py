"""Real chat clients against the engine's OpenAI face (BR-13, BR-20)."""
