"""The tests: unit tests by package (format/, rendering/, store/, authoring/, client/,
executor/, serving/, protocol/), integration/ (real processes), browser/ (Chromium),
and support/ (helpers, no tests). A package, so that modules of the same name in two
directories stay distinct and ``tests.support`` imports the same way under any runner."""
