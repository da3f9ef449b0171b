"""Portable kernels: one folder per kernel, a spec and one file per source language."""
