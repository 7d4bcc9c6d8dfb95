"""Competing load components: ettcp-style network traffic and CPU load."""
