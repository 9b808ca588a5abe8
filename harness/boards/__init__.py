"""Boards: how a target is reached (transports), what it is (platforms), its session, lease and deployment."""
