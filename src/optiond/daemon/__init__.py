"""Local ZeroMQ pricing service: protocol, server, client."""
