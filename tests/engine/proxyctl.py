"""The control files of the test proxies (stallproxy.py, volatileproxy.py):
a test drives a proxy by creating and removing files in a directory, and
the proxy reports by writing files there (whole: written aside, then
renamed, so that a reader never sees half of one)."""
import os


class ControlDir:
    def __init__(self, path):
        self.path = path

    def exists(self, name):
        return os.path.exists(os.path.join(self.path, name))

    def put(self, name, text):
        tmp = os.path.join(self.path, name + ".tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, os.path.join(self.path, name))
