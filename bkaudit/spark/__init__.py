"""bkaudit.spark"""
