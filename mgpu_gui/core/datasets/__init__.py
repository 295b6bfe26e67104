"""Datasets as files: what an `.npz` or an image folder holds, and the batching arithmetic."""
