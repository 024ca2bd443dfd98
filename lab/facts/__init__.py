"""Facts: the repository's files and sha256, the host (image pins, GPU vendor, device nodes,
NVML), the cards a host gives a pass, the defaults, the full-disk error, the error
hierarchy and the type check of a declared field.

May import the standard library and each other only (``host`` loads pynvml and torch
inside functions); never another lab package.
"""
