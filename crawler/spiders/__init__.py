"""The project's spiders: explore (feed API), profiles (profile pages)."""
