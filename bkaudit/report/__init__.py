"""bkaudit.report"""
