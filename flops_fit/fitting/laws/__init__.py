"""Law forms and the estimators that fit them: the maths every approach shares."""
