"""Checking a fit by what it predicts: held-out budgets, forward chaining, the forecast and its interval."""
