"""The UI driven in a real headless Chromium."""
