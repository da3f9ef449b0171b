"""Stand-ins the tests register in place of real backends and vendor libraries: third-party
backends that misbehave on purpose (fail, hang, cheat, reuse an answer, burn wrongly) and NVML
modules that answer as a driver would."""
