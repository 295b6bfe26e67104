"""Model files as files: what a `.keras`, `.h5` or `.py` file holds, without loading it."""
