"""bkaudit.model"""
