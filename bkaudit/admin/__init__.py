"""The cluster-level HTTP management API and dashboard (`bkaudit admin serve`, docs/http-api.md)."""
