"""The decisions a fitted law answers, evaluated only through a fitted result."""
