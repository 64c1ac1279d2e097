"""bkaudit.client"""
