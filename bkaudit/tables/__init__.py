"""bkaudit.tables"""
