"""The CPU backend's front end: MSL source -> a self-describing native module.

``msl.build`` (the module) runs it: ``build.plan``, ``build.build``, ``build.build_all``.
"""
