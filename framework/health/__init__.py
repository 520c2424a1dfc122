"""Training-health monitors (``HEALTH_MONITORS``) and the ``health`` config section that picks them."""
