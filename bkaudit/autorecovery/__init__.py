"""bkaudit.autorecovery"""
