"""Everything drawn or written for a reader: plots, figures, the HTML report."""
