"""What the controller, the daemon and node programs share, imported by all and importing
none of them: the error tree (errors), framing (wire), the framed channel (channel),
authentication (auth), message types and environment names (messages), how a run's
processes are found and ended (exits), and run.json's reader (runrecord). Private to
netspec: applications use netspec.nodelib."""
