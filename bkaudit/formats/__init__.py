"""bkaudit.formats"""
