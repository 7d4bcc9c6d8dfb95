"""A user-space link emulator component (NIST Net's role)."""
