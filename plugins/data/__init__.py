"""The built-in datasets and what feeds them: text and image corpora, tokenizers, token caches."""
