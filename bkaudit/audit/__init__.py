"""bkaudit.audit"""
