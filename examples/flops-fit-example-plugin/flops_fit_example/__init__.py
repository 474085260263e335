"""Example flops-fit plugin package."""
