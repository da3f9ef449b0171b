"""Attention: softmax(Q K^T / sqrt(d)) V."""
