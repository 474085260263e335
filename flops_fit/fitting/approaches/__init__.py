"""The fitting methods: one Approach (and its FitResult) per module."""
