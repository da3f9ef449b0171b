"""Reference data: device peaks and prices, each value with its source and date."""
