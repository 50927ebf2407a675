# An extract of PyTorch's docs/source/conf.py (github.com/pytorch/pytorch): the
# settings that decide where autosummary and autodoc put names.
autodoc_inherit_docstrings = False
autodoc_default_options = {
    "exclude-members": "from_bytes, to_bytes",
}
autosummary_filename_map = {
    "torch.cuda.stream": "torch.cuda.stream_function",
    "torch.cuda.Stream": "torch.cuda.Stream_class",
}
