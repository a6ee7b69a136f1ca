"""What comes in: settings, the inventory, their validation, package and image sources, local state."""
