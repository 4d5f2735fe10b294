"""Built-in drafters. Each module is a plugin registered through the same hook that third parties use."""
