"""A layout shared: share links, runnable code, MaxText YAML (``share``), and the team library of saved layouts
(``library``). Takes a ``Layout`` (or an op); gives text, links and files, and reads them back.
"""
