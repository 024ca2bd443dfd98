"""Task kinds beyond classification (issue 20): their building blocks, one module per idea."""
