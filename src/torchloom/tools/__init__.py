"""The ``torchloom`` command line and the tools behind it.

- :mod:`~torchloom.tools.doctor`: what is wrong with a dataset (``torchloom doctor``);
- :mod:`~torchloom.tools.prepare`: a labelled, reproducible split of a raw folder (``torchloom prepare``);
- :mod:`~torchloom.tools.show`: samples as the model gets them (``torchloom show``);
- :mod:`~torchloom.tools.bench`: loader settings measured on your data (``torchloom bench``);
- :mod:`~torchloom.tools.demo`: the end-to-end demo (``torchloom demo``);
- :mod:`~torchloom.tools.check_resume`: proof that a pipeline resumes exactly (``torchloom check-resume``);
- :mod:`~torchloom.tools.cli`: the command line itself; :mod:`~torchloom.tools.terminal`: its output.
"""
