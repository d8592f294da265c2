"""Ban detection and fleet-wide politeness: rules (pure), identities, shared Redis state."""
