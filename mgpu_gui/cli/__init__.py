"""`mgpu-train`: one module per subcommand; `main` registers them and dispatches."""
