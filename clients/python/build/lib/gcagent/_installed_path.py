# Written by setup.py at install time.
LIBRARY = '/work/wt-7/build-dev/clients/libgcagent_client.so.1.0.0'
