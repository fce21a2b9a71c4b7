"""Pricers. Kernels take NumPy arrays in and give arrays out; they import nothing from the
daemon, add-in or GUI, and GPU modules import CuPy lazily."""
