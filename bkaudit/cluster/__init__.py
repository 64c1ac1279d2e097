"""bkaudit.cluster"""
