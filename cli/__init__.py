"""The `agora` command: daemons (local, master, agent) and clients (cluster, job, app, ...)."""
