"""ResourceGroups admin server: Apache Pulsar's ResourceGroup API (PIP-82) on a SQL store."""
