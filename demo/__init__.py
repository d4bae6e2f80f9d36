"""ATF's demo app: the demo lambdas (demo.lambdas) and their management commands."""

#: The exit status of a worker process that demo.fail's crash mode ends (the chaos run tells
#: such an exit from a fault's own outcome by it).
CRASH_EXIT_STATUS = 17
